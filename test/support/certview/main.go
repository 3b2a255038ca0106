// certview prints Go's reading of CSRs and the certificates issued for them:
// the parser kube-apiserver and the csrsigning controller use, and the view
// the API server's client-certificate authenticator takes of an issued
// certificate (CN = user, O = groups). The approver campaign
// (approver-campaign.test.ts) judges every approval on this, not on
// kubeboot's own parser.
//
// Input: JSON lines {"id", "request", "certificate"}, each value the base64 of
// PEM as a CertificateSigningRequest holds it ("" when absent). Output: one
// JSON line per input, in order.
package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
)

type input struct {
	ID          string `json:"id"`
	Request     string `json:"request"`
	Certificate string `json:"certificate"`
}

type attribute struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

type view struct {
	Error        string      `json:"error,omitempty"`
	CommonName   string      `json:"commonName"`
	Organization []string    `json:"organization"`
	Names        []attribute `json:"names"`
	DNSNames     []string    `json:"dnsNames"`
	IPAddresses  []string    `json:"ipAddresses"`
	Emails       []string    `json:"emails"`
	URIs         []string    `json:"uris"`
	// Tags of every GeneralName in the SAN extension (2 DNS, 7 IP, 0 otherName, 4 directoryName, ...),
	// including the kinds Go does not surface as fields.
	SANTags     []int    `json:"sanTags"`
	Extensions  []string `json:"extensions"`
	KeyType     string   `json:"keyType"`
	KeyBits     int      `json:"keyBits"`
	Curve       string   `json:"curve"`
	SignatureOK bool     `json:"signatureOK"`
	// Certificates only.
	IsCA        bool     `json:"isCA"`
	KeyUsage    int      `json:"keyUsage"`
	ExtKeyUsage []int    `json:"extKeyUsage"`
	UnknownEKU  []string `json:"unknownExtKeyUsage"`
	Lifetime    float64  `json:"lifetimeSeconds"`
}

type output struct {
	ID          string `json:"id"`
	Request     *view  `json:"request,omitempty"`
	Certificate *view  `json:"certificate,omitempty"`
}

func firstBlock(b64, want string) (*pem.Block, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("base64: %v", err)
	}
	// As the API server reads spec.request (certificates.ParseCSR): the first PEM block.
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != want {
		return nil, fmt.Errorf("no %s PEM block", want)
	}
	return block, nil
}

func describeKey(v *view, key any) {
	switch k := key.(type) {
	case *rsa.PublicKey:
		v.KeyType, v.KeyBits = "rsa", k.N.BitLen()
	case *ecdsa.PublicKey:
		v.KeyType, v.Curve, v.KeyBits = "ecdsa", k.Curve.Params().Name, k.Curve.Params().BitSize
	case ed25519.PublicKey:
		v.KeyType = "ed25519"
	default:
		v.KeyType = fmt.Sprintf("%T", key)
	}
}

func sanTags(oid string, value []byte) []int {
	if oid != "2.5.29.17" {
		return nil
	}
	var seq asn1.RawValue
	if _, err := asn1.Unmarshal(value, &seq); err != nil {
		return []int{-1}
	}
	tags := []int{}
	for rest := seq.Bytes; len(rest) > 0; {
		var name asn1.RawValue
		var err error
		if rest, err = asn1.Unmarshal(rest, &name); err != nil {
			return append(tags, -1)
		}
		tags = append(tags, name.Tag)
	}
	return tags
}

func common(v *view, names []attribute, dns []string, ips []fmt.Stringer, emails []string, uris []fmt.Stringer) {
	v.Names, v.DNSNames, v.Emails = names, dns, emails
	for _, ip := range ips {
		v.IPAddresses = append(v.IPAddresses, ip.String())
	}
	for _, u := range uris {
		v.URIs = append(v.URIs, u.String())
	}
}

func readRequest(b64 string) *view {
	v := &view{}
	block, err := firstBlock(b64, "CERTIFICATE REQUEST")
	if err != nil {
		v.Error = err.Error()
		return v
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	v.SignatureOK = csr.CheckSignature() == nil
	v.CommonName, v.Organization = csr.Subject.CommonName, csr.Subject.Organization
	names := []attribute{}
	for _, n := range csr.Subject.Names {
		names = append(names, attribute{n.Type.String(), fmt.Sprint(n.Value)})
	}
	ips := []fmt.Stringer{}
	for _, ip := range csr.IPAddresses {
		ips = append(ips, ip)
	}
	uris := []fmt.Stringer{}
	for _, u := range csr.URIs {
		uris = append(uris, u)
	}
	common(v, names, csr.DNSNames, ips, csr.EmailAddresses, uris)
	for _, ext := range csr.Extensions {
		v.Extensions = append(v.Extensions, ext.Id.String())
		v.SANTags = append(v.SANTags, sanTags(ext.Id.String(), ext.Value)...)
	}
	describeKey(v, csr.PublicKey)
	return v
}

func readCertificate(b64 string) *view {
	v := &view{}
	block, err := firstBlock(b64, "CERTIFICATE")
	if err != nil {
		v.Error = err.Error()
		return v
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	v.CommonName, v.Organization = cert.Subject.CommonName, cert.Subject.Organization
	names := []attribute{}
	for _, n := range cert.Subject.Names {
		names = append(names, attribute{n.Type.String(), fmt.Sprint(n.Value)})
	}
	ips := []fmt.Stringer{}
	for _, ip := range cert.IPAddresses {
		ips = append(ips, ip)
	}
	uris := []fmt.Stringer{}
	for _, u := range cert.URIs {
		uris = append(uris, u)
	}
	common(v, names, cert.DNSNames, ips, cert.EmailAddresses, uris)
	for _, ext := range cert.Extensions {
		v.Extensions = append(v.Extensions, ext.Id.String())
		v.SANTags = append(v.SANTags, sanTags(ext.Id.String(), ext.Value)...)
	}
	describeKey(v, cert.PublicKey)
	v.IsCA, v.KeyUsage = cert.IsCA, int(cert.KeyUsage)
	for _, u := range cert.ExtKeyUsage {
		v.ExtKeyUsage = append(v.ExtKeyUsage, int(u))
	}
	for _, u := range cert.UnknownExtKeyUsage {
		v.UnknownEKU = append(v.UnknownEKU, u.String())
	}
	v.Lifetime = cert.NotAfter.Sub(cert.NotBefore).Seconds()
	return v
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var item input
		if err := json.Unmarshal(in.Bytes(), &item); err != nil {
			fmt.Fprintln(os.Stderr, "certview: bad input line:", err)
			os.Exit(2)
		}
		result := output{ID: item.ID}
		if item.Request != "" {
			result.Request = readRequest(item.Request)
		}
		if item.Certificate != "" {
			result.Certificate = readCertificate(item.Certificate)
		}
		if err := out.Encode(result); err != nil {
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "certview:", err)
		os.Exit(1)
	}
}
