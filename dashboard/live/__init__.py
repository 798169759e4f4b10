"""The live side: websocket consumers, page frames, event streams, the hub, the channel layers,
and closing streams whose credentials end."""
