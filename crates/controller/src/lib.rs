//! sluice's Kubernetes controllers (being built).
