"""Deployment profiles and the local distributed stack (`soco cluster start|stop|status`)."""
