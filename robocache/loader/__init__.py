"""The DataLoader and what it is made of: window plans, sampling, sharding, batches, resume."""
