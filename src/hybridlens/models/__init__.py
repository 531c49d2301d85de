"""Models: the adapter (the only code that knows families), the families, toy and real-shape builders, HLA."""
