"""The gateway's runtime: the Envoy external processor and what it runs (shipped in the gateway image, no Pulumi)."""
