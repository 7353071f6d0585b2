"""Text: corpora (WikiText-2, PTB, local files) and calibration batches drawn from them."""
