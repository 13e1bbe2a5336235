"""The program that composes inferplane's components for one stack, and the ``inferplane`` CLI around it."""
