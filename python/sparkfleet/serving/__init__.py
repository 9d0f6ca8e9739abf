"""Serving the lanes as one endpoint: the gateway (SGLang's Shepherd Model Gateway, `smg`) in front."""
