"""Small utilities every layer may use: metrics, the daemon's local socket, durable files, sizes,
addresses (walfs.errors is the only other module of walfs they import)."""
