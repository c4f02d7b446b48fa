#include "octet/app/tls_material.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

namespace octet::app {
namespace {

template <typename T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using PKeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using StorePtr = std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;

Status SslError(const std::string& step) {
  char buf[256] = {};
  const unsigned long e = ERR_get_error();
  if (e) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return InternalError("TLS: " + step + (e ? std::string(": ") + buf : ""));
}

Result<PKeyPtr> NewKey() {
  PKeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key) return SslError("generate an EC P-256 key");
  return key;
}

Result<std::string> KeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return SslError("write the private key");
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

Result<std::string> CertPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return SslError("write the certificate");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

Result<X509Ptr> ReadCert(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) return SslError("read a PEM certificate");
  return cert;
}

Result<PKeyPtr> ReadKey(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  PKeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) return SslError("read a PEM private key");
  return key;
}

Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) return SslError("make extension " + std::string(OBJ_nid2sn(nid)) + "=" + value);
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) return SslError("add extension " + std::string(OBJ_nid2sn(nid)));
  return Status::Ok();
}

// A certificate for `key` named `cn`, valid from now for `days`, with a random serial.
Result<X509Ptr> NewCert(EVP_PKEY* key, const std::string& cn, int days) {
  X509Ptr cert(X509_new());
  if (!cert) return SslError("allocate a certificate");
  X509_set_version(cert.get(), 2);  // v3
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return SslError("random serial");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  ASN1_INTEGER* sn = bn ? BN_to_ASN1_INTEGER(bn, nullptr) : nullptr;
  BN_free(bn);
  if (!sn) return SslError("serial number");
  X509_set_serialNumber(cert.get(), sn);
  ASN1_INTEGER_free(sn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60 * 60);  // tolerate an hour of clock skew
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(days) * 24 * 60 * 60);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("Octet"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  return cert;
}

bool ValidSanText(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
          c == ':'))
      return false;
  }
  return true;
}

}  // namespace

Result<PemPair> MakeCertificateAuthority(const std::string& common_name, int days) {
  OCTET_ASSIGN_OR_RETURN(PKeyPtr key, NewKey());
  OCTET_ASSIGN_OR_RETURN(X509Ptr cert, NewCert(key.get(), common_name, days));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  OCTET_RETURN_IF_ERROR(
      AddExtension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
  OCTET_RETURN_IF_ERROR(
      AddExtension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  OCTET_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) return SslError("self-sign the CA");
  PemPair out;
  OCTET_ASSIGN_OR_RETURN(out.cert_pem, CertPem(cert.get()));
  OCTET_ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  return out;
}

Result<PemPair> MakeNodeCertificate(const PemPair& ca, const std::string& common_name,
                                    const std::vector<std::string>& dns_names,
                                    const std::vector<std::string>& ip_addresses, int days) {
  OCTET_ASSIGN_OR_RETURN(X509Ptr ca_cert, ReadCert(ca.cert_pem));
  OCTET_ASSIGN_OR_RETURN(PKeyPtr ca_key, ReadKey(ca.key_pem));
  OCTET_ASSIGN_OR_RETURN(PKeyPtr key, NewKey());
  OCTET_ASSIGN_OR_RETURN(X509Ptr cert, NewCert(key.get(), common_name, days));
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get()));
  std::string san;
  for (const auto& d : dns_names) {
    if (!ValidSanText(d)) return InvalidArgumentError("TLS: bad DNS name '" + d + "'");
    san += (san.empty() ? "" : ",") + std::string("DNS:") + d;
  }
  for (const auto& ip : ip_addresses) {
    unsigned char buf[16];
    if (inet_pton(AF_INET, ip.c_str(), buf) != 1 && inet_pton(AF_INET6, ip.c_str(), buf) != 1) {
      return InvalidArgumentError("TLS: bad IP address '" + ip + "'");
    }
    san += (san.empty() ? "" : ",") + std::string("IP:") + ip;
  }
  OCTET_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca_cert.get(), NID_basic_constraints, "critical,CA:FALSE"));
  OCTET_RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert.get(), NID_key_usage,
                                     "critical,digitalSignature,keyAgreement"));
  OCTET_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca_cert.get(), NID_ext_key_usage, "serverAuth,clientAuth"));
  if (!san.empty()) {
    OCTET_RETURN_IF_ERROR(AddExtension(cert.get(), ca_cert.get(), NID_subject_alt_name, san));
  }
  if (X509_sign(cert.get(), ca_key.get(), EVP_sha256()) == 0)
    return SslError("sign the node certificate");
  PemPair out;
  OCTET_ASSIGN_OR_RETURN(out.cert_pem, CertPem(cert.get()));
  OCTET_ASSIGN_OR_RETURN(out.key_pem, KeyPem(key.get()));
  return out;
}

Status VerifyCertificate(const std::string& ca_pem, const std::string& cert_pem) {
  OCTET_ASSIGN_OR_RETURN(X509Ptr ca, ReadCert(ca_pem));
  OCTET_ASSIGN_OR_RETURN(X509Ptr cert, ReadCert(cert_pem));
  StorePtr store(X509_STORE_new());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1) {
    return SslError("set up verification");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    return FailedPreconditionError(
        std::string("TLS: certificate does not verify against the CA: ") +
        X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())));
  }
  return Status::Ok();
}

Result<std::vector<std::string>> CertificateNames(const std::string& cert_pem) {
  OCTET_ASSIGN_OR_RETURN(X509Ptr cert, ReadCert(cert_pem));
  std::vector<std::string> out;
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr));
  if (!names) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* g = sk_GENERAL_NAME_value(names, i);
    if (g->type == GEN_DNS) {
      const auto* s = g->d.dNSName;
      out.push_back("DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                         static_cast<size_t>(ASN1_STRING_length(s))));
    } else if (g->type == GEN_IPADD) {
      const auto* s = g->d.iPAddress;
      char buf[INET6_ADDRSTRLEN] = {};
      const int len = ASN1_STRING_length(s);
      inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(s), buf, sizeof buf);
      out.push_back(std::string("IP:") + buf);
    }
  }
  GENERAL_NAMES_free(names);
  return out;
}

}  // namespace octet::app
