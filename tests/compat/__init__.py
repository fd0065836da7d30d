"""Drop-in compatibility with torch.export: behaviour users rely on, checked against torch."""
