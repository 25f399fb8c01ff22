//go:build unix

package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is how long the generated certificates are valid: far longer
// than any test or demo runs.
const certValidity = 365 * 24 * time.Hour

// pki is the certificate authority of one control plane and the files the
// apiserver reads.
type pki struct {
	caCert    *x509.Certificate
	caKey     *ecdsa.PrivateKey
	caCertPEM []byte

	// Files in the pki directory.
	caFile, servingCertFile, servingKeyFile, serviceAccountKeyFile string
}

// newPKI generates a CA, a serving certificate for 127.0.0.1 and localhost,
// and a service-account signing key, and writes them to dir.
func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p, err := newCA()
	if err != nil {
		return nil, err
	}
	p.caFile = filepath.Join(dir, "ca.crt")
	p.servingCertFile = filepath.Join(dir, "apiserver.crt")
	p.servingKeyFile = filepath.Join(dir, "apiserver.key")
	p.serviceAccountKeyFile = filepath.Join(dir, "service-account.key")
	servingCert, servingKey, err := p.servingCert("kube-apiserver")
	if err != nil {
		return nil, err
	}
	saKey, err := newKey()
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := keyPEM(saKey)
	if err != nil {
		return nil, err
	}
	for path, data := range map[string][]byte{
		p.caFile:                p.caCertPEM,
		p.servingCertFile:       servingCert,
		p.servingKeyFile:        servingKey,
		p.serviceAccountKeyFile: saKeyPEM,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// newCA generates a certificate authority, with no files.
func newCA() (*pki, error) {
	caKey, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: "typedinformer-controlplane-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("creating the CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	return &pki{caCert: caCert, caKey: caKey, caCertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})}, nil
}

// servingCert issues a serving certificate for 127.0.0.1 and localhost, returning the
// certificate and key in PEM.
func (p *pki) servingCert(name string) (certPEM, keyPEM []byte, err error) {
	return p.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
	})
}

// clientCert issues a client certificate for user in groups (the
// certificate's CommonName and Organizations, which is how kube-apiserver
// reads them), returning the certificate and key in PEM.
func (p *pki) clientCert(user string, groups []string) (certPEM, keyPEM []byte, err error) {
	return p.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// issue signs template with the CA for a new key, returning the certificate
// and key in PEM.
func (p *pki) issue(template *x509.Certificate) (certPEM, privPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	template.SerialNumber = newSerial()
	template.NotBefore = now.Add(-time.Hour)
	template.NotAfter = now.Add(certValidity)
	template.KeyUsage = x509.KeyUsageDigitalSignature
	template.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, template, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("creating a certificate for %q: %w", template.Subject.CommonName, err)
	}
	privPEM, err = keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), privPEM, nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a key: %w", err)
	}
	return key, nil
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func newSerial() *big.Int {
	// 128 random bits; rand.Int never fails with crypto/rand.Reader.
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err)
	}
	return n.Add(n, big.NewInt(1))
}
