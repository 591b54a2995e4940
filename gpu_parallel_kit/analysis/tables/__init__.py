"""The tables and text people read: the comparison table, its compact and terminal views, cells,
intervals, advice and time to accuracy."""
