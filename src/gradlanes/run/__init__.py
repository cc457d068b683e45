"""Running a lane and checking it: the training loop, compile counting, records, model files, and
the agreement checks against the float64 reference."""
