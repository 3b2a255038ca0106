module kubeboot.test/certview

go 1.24
