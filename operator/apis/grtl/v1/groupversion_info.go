// Package v1 holds the MySQLCluster API (seed 000): grtl's mysql-operator
// (abandoned since 2018) kinds MySQLCluster, MySQLBackupSchedule and
// MySQLBackupInstance, with their group, names and short names, so the
// seed's example applies unchanged and grtl's users find them. deckhand
// runs them on the Database machinery with the MySQL engine
// (operator/database/mysql).
//
// +kubebuilder:object:generate=true
// +groupName=cr.mysqloperator.grtl.github.com
package v1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of MySQLCluster.
	GroupVersion = schema.GroupVersion{Group: "cr.mysqloperator.grtl.github.com", Version: "v1"}

	// SchemeBuilder registers the types of this group version with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
