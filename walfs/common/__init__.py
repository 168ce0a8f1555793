"""Small utilities every layer may use: metrics, the daemon's local socket, durable files, sizes."""
