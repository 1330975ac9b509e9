"""Built-in scheduling policies, registered through the ``gctl.policies`` entry points."""
