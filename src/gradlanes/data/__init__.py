"""Dataset acquisition: fetch idx archives from mirrors, verify them, parse them into arrays."""
