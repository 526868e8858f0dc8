"""The dataset model: a Dataset's streams, how episodes are built into them, their statistics."""
