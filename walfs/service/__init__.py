"""The daemons: the service lifecycle (lifecycle.py) shared by `walfs mount` (daemon.py) and
`walfs serve` (kafka_server.py)."""
