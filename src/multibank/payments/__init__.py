"""Payments (D12 to D15): transfers, sends and outgoing wire transfers."""
