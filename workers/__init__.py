"""What runs on a worker: task bodies, the diffusion runtime, embeddings, role switching."""
