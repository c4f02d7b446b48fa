// TLS material for a cluster: a cluster CA and one certificate per node, made
// with OpenSSL's libcrypto (EC P-256 keys, SHA-256 signatures).
//
// Why libcrypto and not the `openssl` command: no dependence on a CLI being on
// PATH or on its flag spelling across versions, errors come back as Status
// with the step that failed, and keys go straight to 0600 files through
// WriteFileAtomic without a temporary copy with wider permissions.
#pragma once

#include <string>
#include <vector>

#include "octet/base/status.h"

namespace octet::app {

struct PemPair {
  std::string cert_pem;
  std::string key_pem;  // PKCS#8, unencrypted: protect the file (0600)
};

// A self-signed CA certificate (CA:TRUE, keyCertSign) valid for `days`.
Result<PemPair> MakeCertificateAuthority(const std::string& common_name, int days = 3650);

// A server+client certificate signed by `ca` with the given subject
// alternative names (DNS names and IP addresses) valid for `days`.
Result<PemPair> MakeNodeCertificate(const PemPair& ca, const std::string& common_name,
                                    const std::vector<std::string>& dns_names,
                                    const std::vector<std::string>& ip_addresses, int days = 3650);

// OK when `cert_pem` chains to `ca_pem` and is within its validity.
Status VerifyCertificate(const std::string& ca_pem, const std::string& cert_pem);

// The subject alternative names of a certificate ("DNS:node1", "IP:10.0.0.1").
Result<std::vector<std::string>> CertificateNames(const std::string& cert_pem);

}  // namespace octet::app
