"""The service lifecycle shared by `walfs mount` and `walfs serve`."""
