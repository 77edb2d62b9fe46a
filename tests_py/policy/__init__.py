"""The policy file and its reload."""
