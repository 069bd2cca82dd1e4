"""Where a policy comes from: hub or local model folders, the tiny random model, and the folder format
every rule loads."""
