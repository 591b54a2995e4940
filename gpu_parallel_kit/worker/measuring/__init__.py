"""What a run measures inside its worker: step times, their statistics, and its later rounds."""
