"""bxctl, the owner's command line."""
