"""What the machine has: host memory this process may take, what the NVIDIA driver says."""
