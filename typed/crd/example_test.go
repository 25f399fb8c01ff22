package crd_test

import (
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedinformer/typedinformer/typed/crd"
)

// Backup is a custom resource's Go type: its JSON tags are its schema.
type Backup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              BackupSpec   `json:"spec"`
	Status            BackupStatus `json:"status,omitempty"`
}

type BackupSpec struct {
	Schedule  string    `json:"schedule"`            // required: no omitempty
	KeepLast  *int32    `json:"keepLast,omitempty"`  // optional
	Retention Retention `json:"retention,omitempty"` // an enum, from the type
}

// Retention is Daily or Weekly; EnumValues says so wherever it is used.
type Retention string

func (Retention) EnumValues() []string { return []string{"Daily", "Weekly"} }

type BackupStatus struct {
	LastBackup *metav1.Time `json:"lastBackup,omitempty"`
}

func (b *Backup) DeepCopyObject() runtime.Object { c := *b; return &c } // shallow: enough for this example

func Example() {
	def := &crd.Definition{Group: "backup.example.com", Kind: "Backup", Versions: []crd.Version{
		crd.VersionOf[*Backup]("v1", crd.Storage(),
			crd.Field(".spec.keepLast", crd.Minimum(1), crd.Default(7)),
			crd.Field(".spec.schedule", crd.MinLength(1)),
			crd.Field(".", crd.Rule("self.spec.keepLast <= 366", "keep at most a year of backups")),
			crd.Column("Last Backup", ".status.lastBackup", 0)),
	}}
	c, err := def.Build() // or BuildFromServer, Install, InstallDefinitions
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Name, c.Spec.Versions[0].Subresources.Status != nil)
	_ = crd.WriteYAML(os.Stdout, c) // for kubectl apply -f

	// A path that is not in the schema is an error, never ignored:
	def.Versions[0] = crd.VersionOf[*Backup]("v1", crd.Storage(), crd.Field(".spec.keeplast", crd.Minimum(1)))
	_, err = def.Build()
	fmt.Println(err)
	// Output:
	// backups.backup.example.com true
	// apiVersion: apiextensions.k8s.io/v1
	// kind: CustomResourceDefinition
	// metadata:
	//   name: backups.backup.example.com
	// spec:
	//   group: backup.example.com
	//   names:
	//     kind: Backup
	//     listKind: BackupList
	//     plural: backups
	//     singular: backup
	//   scope: Namespaced
	//   versions:
	//   - additionalPrinterColumns:
	//     - jsonPath: .status.lastBackup
	//       name: Last Backup
	//       type: date
	//     name: v1
	//     schema:
	//       openAPIV3Schema:
	//         properties:
	//           apiVersion:
	//             type: string
	//           kind:
	//             type: string
	//           metadata:
	//             type: object
	//           spec:
	//             properties:
	//               keepLast:
	//                 default: 7
	//                 format: int32
	//                 minimum: 1
	//                 type: integer
	//               retention:
	//                 enum:
	//                 - Daily
	//                 - Weekly
	//                 type: string
	//               schedule:
	//                 minLength: 1
	//                 type: string
	//             required:
	//             - schedule
	//             type: object
	//           status:
	//             properties:
	//               lastBackup:
	//                 format: date-time
	//                 type: string
	//             type: object
	//         required:
	//         - spec
	//         type: object
	//         x-kubernetes-validations:
	//         - message: keep at most a year of backups
	//           rule: self.spec.keepLast <= 366
	//     served: true
	//     storage: true
	//     subresources:
	//       status: {}
	// crd: version v1, .spec.keeplast: crd: no such path in the schema: no field "keeplast" here (fields: keepLast, retention, schedule)
}
