"""What a pipeline worker does on any backend: the graph of layer calls it cuts, the timeline
and bubbles of its tasks, and the micro-batch curve it chooses M from. Nothing is imported here."""
