"""Demo components: stand-ins for the real fleet that run on one laptop (a fake OpenAI server)."""
