"""The local engine: the C core's log in a data directory."""
