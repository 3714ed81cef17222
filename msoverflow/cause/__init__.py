"""What caused each origin's bad value: recomputation, replicas, where it sits, since when (runs after the
findings are decided)."""
