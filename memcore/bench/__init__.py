"""``memcore bench``: storage backends side by side on the same data, against the exact-search floor."""
