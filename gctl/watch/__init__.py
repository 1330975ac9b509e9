"""``gctl watch``: a Textual dashboard of node height, GPU packing, jobs and migrations.

The data layer (:mod:`gctl.watch.data`) takes frames from the same services
as the CLI in a worker thread; the widgets only render frames; operator
actions (:mod:`gctl.watch.actions`) go through the services too.
"""
