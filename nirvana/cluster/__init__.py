"""Grids on a Ray cluster: connect to one, run plain picklable jobs as Ray tasks (`nirvana.cluster.ray_tasks`)."""
