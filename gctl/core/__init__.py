"""The pure scheduler core shared by the daemon and the simulator: no I/O, no clock."""
