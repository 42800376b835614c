"""The sandbox simulator API of contract §8 and D8, under /simulate/api."""
