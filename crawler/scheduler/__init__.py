"""The Redis frontier."""
