"""Training the router and the retriever from a company's documents."""
