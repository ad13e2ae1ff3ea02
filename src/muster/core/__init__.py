"""muster's runtime layer: the seam (``runtime``) and its engines (``local``)."""
