"""What a run gives back: its result, its trace and figures below their noise."""
