"""Small shared helpers every layer may use: no models, no reads, no writes."""
