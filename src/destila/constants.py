"""Values every layer agrees on (bottom layer: imports nothing of destila)."""

# The label of a position that is not trained (padding, prompt tokens, a sequence's last position):
# the loss leaves such rows out of both terms. -100 is PyTorch's and transformers' default ignore_index.
IGNORE_INDEX = -100
