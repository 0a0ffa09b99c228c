"""What the gateway knows about endpoints: discovery, metrics scraping, KV events."""
