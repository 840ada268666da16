"""What the teacher provides: top-K targets from one teacher's head or from a mixture of teachers."""
