"""Child processes of the caller: how they start, talk back and fail, and their progress."""
