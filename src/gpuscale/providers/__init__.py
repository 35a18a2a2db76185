"""Node providers: the clouds and cluster APIs that add and remove nodes."""
