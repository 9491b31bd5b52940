"""Configuration files as pydantic models. Loading errors name the file and the key path."""
