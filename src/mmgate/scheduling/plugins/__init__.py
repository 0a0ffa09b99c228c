"""mmgate.scheduling.plugins."""
