"""What a person sees of a run: the live terminal view."""
