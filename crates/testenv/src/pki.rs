//! The test cluster's certificates: one CA, a serving certificate for kube-apiserver and
//! the node agent's kubelet endpoint, and the client certificate kube-apiserver shows the
//! kubelet endpoint (`--kubelet-client-certificate`).
//!
//! kube-apiserver's own self-signed certificate names 127.0.0.1 only, but pods reach the API
//! server at their bridge's gateway (in-cluster config verifies the name against the CA in
//! `ca.crt`), and kube-apiserver reaches the kubelet endpoint there too. The gateway is
//! `10.244.K.1` for a K chosen when the first pod starts, so the serving certificate names
//! every gateway the pod network can pick.

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// Paths of the PEM files [`write`] made, and the DER the node agent serves with.
#[derive(Debug, Clone)]
pub(crate) struct Pki {
    pub ca_der: Vec<u8>,
    pub serving_cert_der: Vec<u8>,
    pub serving_key_der: Vec<u8>,
    /// The CA every other certificate is signed by (the pods' `ca.crt`).
    pub ca: PathBuf,
    /// Serving certificate and key: kube-apiserver and the kubelet endpoint.
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    /// kube-apiserver's client certificate and key towards kubelets.
    pub kubelet_client_cert: PathBuf,
    pub kubelet_client_key: PathBuf,
}

/// Generates the CA and certificates into `dir`.
pub(crate) fn write(dir: &Path) -> anyhow::Result<Pki> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "sluice-test-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;

    let mut names: Vec<String> = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "127.0.0.1",
        // The first address of --service-cluster-ip-range, the `kubernetes` Service's.
        "10.96.0.1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.extend(crate::network::gateway_candidates().map(|ip| ip.to_string()));
    let serving_key = KeyPair::generate()?;
    let mut serving = CertificateParams::new(names)?;
    serving
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_cert = serving.signed_by(&serving_key, &ca)?;

    let client_key = KeyPair::generate()?;
    let mut client = CertificateParams::new(Vec::<String>::new())?;
    client
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver-kubelet-client");
    client
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = client.signed_by(&client_key, &ca)?;

    let pki = Pki {
        ca_der: ca.der().to_vec(),
        serving_cert_der: serving_cert.der().to_vec(),
        serving_key_der: serving_key.serialize_der(),
        ca: dir.join("ca.crt"),
        serving_cert: dir.join("serving.crt"),
        serving_key: dir.join("serving.key"),
        kubelet_client_cert: dir.join("kubelet-client.crt"),
        kubelet_client_key: dir.join("kubelet-client.key"),
    };
    for (path, pem) in [
        (&pki.ca, ca.pem()),
        (&pki.serving_cert, serving_cert.pem()),
        (&pki.serving_key, serving_key.serialize_pem()),
        (&pki.kubelet_client_cert, client_cert.pem()),
        (&pki.kubelet_client_key, client_key.serialize_pem()),
    ] {
        std::fs::write(path, pem).with_context(|| format!("write {}", path.display()))?;
    }
    Ok(pki)
}
