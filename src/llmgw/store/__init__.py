"""One store interface; SQLite is the embedded default."""
