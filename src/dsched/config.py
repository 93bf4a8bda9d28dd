"""Configuration (being written)."""
