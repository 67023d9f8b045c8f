"""The demo renderer: a separate process that animates frames in shared memory and runs them
through the service (``fenceline demo`` starts both)."""
