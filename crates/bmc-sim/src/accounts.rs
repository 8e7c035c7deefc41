//! A BMC's user accounts and the Redfish standard roles. Every real BMC has an AccountService: the Redfish
//! specification requires the Administrator, Operator and ReadOnly roles, one role per account, and ETags on
//! accounts so two administrators cannot overwrite each other's changes. Privileges follow DMTF's privilege
//! registry (DSP8011): reads need `Login`, user changes `ConfigureUsers`, manager resources (virtual media,
//! sessions of others) `ConfigureManager`, and the managed system `ConfigureComponents`.

use std::collections::BTreeMap;

/// A Redfish privilege (`Privileges.PrivilegeType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Privilege {
    Login,
    ConfigureManager,
    ConfigureUsers,
    ConfigureComponents,
    ConfigureSelf,
}

impl Privilege {
    pub fn name(self) -> &'static str {
        match self {
            Privilege::Login => "Login",
            Privilege::ConfigureManager => "ConfigureManager",
            Privilege::ConfigureUsers => "ConfigureUsers",
            Privilege::ConfigureComponents => "ConfigureComponents",
            Privilege::ConfigureSelf => "ConfigureSelf",
        }
    }
}

/// One of the predefined roles. Predefined roles cannot be changed, so they are a closed set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Administrator,
    Operator,
    ReadOnly,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Administrator, Role::Operator, Role::ReadOnly];

    pub fn id(self) -> &'static str {
        match self {
            Role::Administrator => "Administrator",
            Role::Operator => "Operator",
            Role::ReadOnly => "ReadOnly",
        }
    }

    pub fn parse(id: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.id() == id)
    }

    /// The role's `AssignedPrivileges`, as the Redfish specification defines the standard roles.
    pub fn privileges(self) -> &'static [Privilege] {
        use Privilege as P;
        match self {
            Role::Administrator => &[
                P::Login,
                P::ConfigureManager,
                P::ConfigureUsers,
                P::ConfigureComponents,
                P::ConfigureSelf,
            ],
            Role::Operator => &[P::Login, P::ConfigureComponents, P::ConfigureSelf],
            Role::ReadOnly => &[P::Login, P::ConfigureSelf],
        }
    }

    pub fn has(self, privilege: Privilege) -> bool {
        self.privileges().contains(&privilege)
    }
}

/// Who sent a request: an account and its role at the time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Principal {
    pub account: u32,
    pub role: Role,
}

/// One user account.
#[derive(Clone, Debug)]
pub struct Account {
    pub user: String,
    pub password: String,
    pub role: Role,
    pub enabled: bool,
    pub locked: bool,
    /// Bumped on every write, the password's included: the account's ETag, so a write the body does not show
    /// (a new password) still invalidates tags read before it.
    pub generation: u64,
}

/// Why an account cannot be created.
#[derive(Debug, PartialEq, Eq)]
pub enum CreateError {
    /// The user name is taken.
    Exists,
    /// No free account slot.
    Full,
}

/// The accounts of one BMC. Account 1 is the administrator the simulator was started with.
pub struct Accounts {
    next: u32,
    generation: u64,
    by_id: BTreeMap<u32, Account>,
}

/// iDRAC has 16 user slots, iLO 12, XCC 12; a BMC without room refuses more.
const MAX_ACCOUNTS: usize = 16;
/// Shortest password a BMC takes (`MinPasswordLength`).
pub const MIN_PASSWORD: usize = 8;
/// Longest password a BMC takes (`MaxPasswordLength`).
pub const MAX_PASSWORD: usize = 40;

impl Accounts {
    pub fn new(admin_user: &str, admin_password: &str) -> Accounts {
        let mut by_id = BTreeMap::new();
        by_id.insert(
            1,
            Account {
                user: admin_user.to_owned(),
                password: admin_password.to_owned(),
                role: Role::Administrator,
                enabled: true,
                locked: false,
                generation: 1,
            },
        );
        Accounts {
            next: 2,
            generation: 1,
            by_id,
        }
    }

    /// The enabled, unlocked account with these credentials.
    pub fn authenticate(&self, user: &str, password: &str) -> Option<Principal> {
        self.by_id
            .iter()
            .find(|(_, a)| a.user == user && a.password == password && a.enabled && !a.locked)
            .map(|(id, a)| Principal {
                account: *id,
                role: a.role,
            })
    }

    /// The principal of an account that still exists and may log in.
    pub fn principal(&self, id: u32) -> Option<Principal> {
        self.by_id
            .get(&id)
            .filter(|a| a.enabled && !a.locked)
            .map(|a| Principal {
                account: id,
                role: a.role,
            })
    }

    pub fn ids(&self) -> Vec<u32> {
        self.by_id.keys().copied().collect()
    }

    pub fn get(&self, id: u32) -> Option<&Account> {
        self.by_id.get(&id)
    }

    /// The account to change; its generation moves on, which changes its ETag.
    pub fn write(&mut self, id: u32) -> Option<&mut Account> {
        self.generation += 1;
        let generation = self.generation;
        let account = self.by_id.get_mut(&id)?;
        account.generation = generation;
        Some(account)
    }

    pub fn create(&mut self, user: &str, password: &str, role: Role) -> Result<u32, CreateError> {
        if self.by_id.values().any(|a| a.user == user) {
            return Err(CreateError::Exists);
        }
        if self.by_id.len() >= MAX_ACCOUNTS {
            return Err(CreateError::Full);
        }
        let id = self.next;
        self.next += 1;
        self.generation += 1;
        self.by_id.insert(
            id,
            Account {
                user: user.to_owned(),
                password: password.to_owned(),
                role,
                enabled: true,
                locked: false,
                generation: self.generation,
            },
        );
        Ok(id)
    }

    pub fn remove(&mut self, id: u32) -> Option<Account> {
        self.by_id.remove(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_roles_carry_the_specified_privileges() {
        let cases = [
            (Role::Administrator, Privilege::ConfigureUsers, true),
            (Role::Administrator, Privilege::ConfigureManager, true),
            (Role::Operator, Privilege::ConfigureComponents, true),
            (Role::Operator, Privilege::ConfigureUsers, false),
            (Role::Operator, Privilege::ConfigureManager, false),
            (Role::ReadOnly, Privilege::Login, true),
            (Role::ReadOnly, Privilege::ConfigureSelf, true),
            (Role::ReadOnly, Privilege::ConfigureComponents, false),
        ];
        for (role, privilege, expected) in cases {
            assert_eq!(role.has(privilege), expected, "{role:?} {privilege:?}");
        }
    }

    #[test]
    fn accounts_authenticate_and_rotate_on_write() {
        let mut accounts = Accounts::new("admin", "password");
        assert_eq!(
            accounts.authenticate("admin", "password"),
            Some(Principal {
                account: 1,
                role: Role::Administrator
            })
        );
        let id = accounts
            .create("ops", "s3cret-pw", Role::Operator)
            .expect("created");
        assert_eq!(
            accounts.create("ops", "other-pw", Role::ReadOnly),
            Err(CreateError::Exists)
        );
        let before = accounts.get(id).expect("exists").generation;
        accounts.write(id).expect("exists").password = "n3w-secret".into();
        assert!(accounts.get(id).expect("exists").generation > before);
        assert!(accounts.authenticate("ops", "s3cret-pw").is_none());
        assert_eq!(
            accounts.authenticate("ops", "n3w-secret").map(|p| p.role),
            Some(Role::Operator)
        );
        accounts.write(id).expect("exists").enabled = false;
        assert!(accounts.authenticate("ops", "n3w-secret").is_none());
    }
}
