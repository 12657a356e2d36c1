"""Router (p_j = P(domain j | query)) and the stochastic gate."""
