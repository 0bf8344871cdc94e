//! Empty: this package exists only to fetch mlx-c sources.
